"""int8 on a CPU (notebook 05.2, sections 2, 4 and 5): FBGEMM's instruction level, PyTorch's int8 path, batch-1
bytes, and SmoothQuant's rescaling."""

import pytest
import torch
from torch import nn

from course_lib.compression import fake_quant, int8_cpu

AVX2 = {"avx2", "fma"}
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512dq", "avx512vl"}


@pytest.mark.parametrize(
    "flags, env, expected",
    [
        (AVX512 | {"avx512_vnni"}, "", "AVX-512 VNNI"),
        (AVX512 | {"avx512_vnni", "amx_int8"}, "", "AVX-512 VNNI"),  # FBGEMM has no AMX kernels
        (AVX512, "", "AVX-512"),
        (AVX2 | {"avx_vnni"}, "", "AVX2"),
        (AVX2, "", "AVX2"),
        ({"sse4_2"}, "", "none"),
        (AVX512 | {"avx512_vnni"}, "AVX2", "AVX2"),  # held lower by FBGEMM_ENABLE_INSTRUCTIONS
        (AVX512 | {"avx512_vnni"}, "avx512", "AVX-512"),
        (AVX2, "AVX512_E1", "AVX2"),  # never raised above the CPU
        (AVX512 | {"avx512_vnni"}, "bogus", "AVX-512 VNNI"),
    ],
)
def test_fbgemm_isa(flags, env, expected):
    assert int8_cpu.fbgemm_isa(frozenset(flags), "x86_64", env=env) == expected


def test_fbgemm_isa_off_x86_and_bad_input():
    assert int8_cpu.fbgemm_isa(frozenset(AVX512), "aarch64", env="") == "none"
    with pytest.raises(TypeError):
        int8_cpu.fbgemm_isa(["avx2"], "x86_64")


def test_fbgemm_isa_reads_the_environment(monkeypatch):
    monkeypatch.setenv(int8_cpu._FBGEMM_ENV, "AVX2")
    assert int8_cpu.fbgemm_isa(frozenset(AVX512 | {"avx512_vnni"}), "x86_64") == "AVX2"


@pytest.mark.skipif(int8_cpu.pytorch_int8_problem() is not None, reason="no PyTorch int8 engine in this torch")
def test_pytorch_int8_dynamic_is_close_and_leaves_the_model_alone():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).eval()
    before = [p.clone() for p in model.parameters()]
    q = int8_cpu.pytorch_int8_dynamic(model)
    x = torch.randn(16, 32)
    with torch.no_grad():
        exact, approx = model(x), q(x)
    assert ((approx - exact).norm() / exact.norm()).item() < 0.05
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert not any(isinstance(m, nn.Linear) and type(m) is nn.Linear for m in q.modules())
    with pytest.raises(TypeError):
        int8_cpu.pytorch_int8_dynamic("model")


def test_weight_stack_and_bad_sizes():
    stack = int8_cpu._weight_stack(3 * 64 * 64, 64)
    assert len(stack) == 3 and sum(p.numel() for p in stack.parameters()) == 3 * 64 * 64
    assert len(int8_cpu._weight_stack(10, 64)) == 1
    for bad in (0, -5, 2.5, True):
        with pytest.raises((ValueError, TypeError)):
            int8_cpu._weight_stack(bad)


def test_batch1_sweep_counts_bytes_per_kind():
    kinds = ("fp32", "bf16") + (() if int8_cpu.pytorch_int8_problem() else ("int8",))
    points = int8_cpu.batch1_sweep([64 * 64, 2 * 64 * 64], kinds=kinds, width=64, rounds=1, min_run_time=0.001)
    assert [p.n_params for p in points] == [64 * 64, 2 * 64 * 64]
    per_byte = {"fp32": 4, "bf16": 2, "int8": 1}
    for p in points:
        assert set(p.timings) == set(kinds)
        assert all(p.weight_bytes[k] == per_byte[k] * p.n_params for k in kinds)
        assert p.predicted_s("fp32", 1e9) == pytest.approx(4 * p.n_params / 1e9)
    with pytest.raises(ValueError):
        int8_cpu.batch1_sweep([4096], kinds=("fp8",))
    with pytest.raises(ValueError):
        int8_cpu.batch1_sweep([4096], kinds=())


def test_tokens_from_bandwidth():
    # 7e9 weights of 2 bytes at 100 GB/s: 140 ms; and back
    assert int8_cpu.ms_per_token(7e9, 2, 100e9) == pytest.approx(140.0)
    assert int8_cpu.largest_model_within(140.0, 2, 100e9) == pytest.approx(7e9)
    for bad in (0, -1, "1", True):
        with pytest.raises(ValueError):
            int8_cpu.ms_per_token(bad, 2, 1e9)
        with pytest.raises(ValueError):
            int8_cpu.largest_model_within(bad, 2, 1e9)


def test_read_bandwidth_is_a_rate_and_checks_size():
    assert 1e8 < int8_cpu.read_bandwidth(4 * 2**20, min_run_time=0.01) < 1e13
    with pytest.raises(ValueError):
        int8_cpu.read_bandwidth(10)


def test_smoothing_keeps_the_product_and_rescues_outlier_channels():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(64, 32, generator=g).abs(), torch.randn(16, 32, generator=g)
    spread = 10 ** torch.linspace(-1, 1, 32)  # activation channels 100x apart, weight columns the inverse
    xs, ws = x * spread, w / spread
    s = fake_quant.smoothing_factors(xs, ws)
    assert torch.allclose((xs / s) @ (ws * s).T, xs @ ws.T, rtol=1e-4, atol=1e-5)
    plain, smoothed = fake_quant.int8_product_error(xs, ws), fake_quant.int8_product_error(xs, ws, s)
    assert smoothed < plain / 3
    # alpha = 0 leaves the activations alone except for dividing by 1 / max|w|: alpha is honoured
    s0 = fake_quant.smoothing_factors(xs, ws, alpha=0.0)
    assert torch.allclose(s0, 1 / ws.abs().amax(0))
    with pytest.raises(ValueError):
        fake_quant.smoothing_factors(xs, ws[:, :5])
    with pytest.raises(ValueError):
        fake_quant.smoothing_factors(xs, ws, alpha=2)
    with pytest.raises(TypeError):
        fake_quant.smoothing_factors(xs[0], ws)


def test_product_profile_names_the_product_op_and_its_rate():
    torch.manual_seed(0)
    # products large enough to outweigh the per-call ops (a 16 x 64 layer's product takes about as long as a transpose)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 64)).eval()
    op, share, rate = int8_cpu.product_profile(
        model, 64, calls=20
    )  # enough calls that one preempted transpose cannot lead
    assert op in ("aten::addmm", "aten::mm", "aten::linear") and 0 < share <= 1 and rate > 0
    with pytest.raises(TypeError, match="model"):
        int8_cpu.product_profile("not a model", 4)
    with pytest.raises(ValueError, match="batch"):
        int8_cpu.product_profile(model, 0)
    with pytest.raises(ValueError, match="Linear"):
        int8_cpu.product_profile(nn.ReLU(), 4)


def test_int8_units_from_flags():
    assert int8_cpu.int8_units({"avx2", "fma"}, "x86_64") == "none"
    assert int8_cpu.int8_units({"avx512f", "avx512_vnni"}, "x86_64") == "AVX-512 VNNI"
    assert int8_cpu.int8_units({"avx512f", "avx512_vnni", "amx_int8", "amx_tile"}, "x86_64") == "AMX INT8"
    assert int8_cpu.int8_units({"avx2", "avx_vnni"}, "x86_64") == "AVX-VNNI"
    assert int8_cpu.int8_units({"asimd", "asimddp"}, "aarch64") == "unknown"
    assert set(int8_cpu.INT8_EXPECTATIONS) >= {"AMX INT8", "AVX-512 VNNI", "AVX-VNNI", "none", "held", "unknown"}
    assert int8_cpu.int8_units() in int8_cpu.INT8_EXPECTATIONS
    with pytest.raises(TypeError, match="flags"):
        int8_cpu.int8_units(["avx2"], "x86_64")


def test_int8_units_respects_onednn_held_below_vnni(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert int8_cpu.int8_units({"avx512f", "avx512_vnni"}, "x86_64") == "held"
    assert int8_cpu.int8_units({"avx2", "fma"}, "x86_64") == "none"  # nothing to hold below


def test_one_table_of_int8_instructions_serves_both_paths():
    """INT8_UNITS is the one table of int8 instructions: macOS's spelling of VNNI counts for FBGEMM as for torchao."""
    assert int8_cpu.fbgemm_isa(frozenset(AVX512 | {"avx512vnni"}), "x86_64", env="") == "AVX-512 VNNI"
    assert int8_cpu.int8_units({"avx512f", "avx512vnni"}, "x86_64") in ("AVX-512 VNNI", "held")
    assert (
        set(int8_cpu.INT8_UNITS.values()) == {"AMX INT8", "AVX-512 VNNI", "AVX-VNNI"} <= set(int8_cpu.INT8_EXPECTATIONS)
    )
