"""Unit tests of notebook 01's step-on-the-roofline models and the data-sheet peak's caveats."""

import pytest

from course_lib import compute
from course_lib.hardware import peak


def test_training_step_bytes_and_intensity():
    assert compute.training_step_bytes(1000) == 24_000  # 6 touches x 4 bytes
    assert compute.training_step_intensity(8) == pytest.approx(2.0)  # batch / 4 in fp32
    assert compute.training_step_intensity(8, dtype="bf16") == pytest.approx(4.0)
    with pytest.raises(ValueError):
        compute.training_step_intensity(0)


def test_step_time_models_pick_the_slower_roof():
    m = compute.step_time_models(1e6, 2, 1e-4, peak_flops=1e11, bandwidth=1e10)
    assert m["overhead only"] == pytest.approx(1e-4)
    assert m["compute only"] == pytest.approx(1e-4 + 12e6 / 1e11)
    assert m["roofline"] == pytest.approx(1e-4 + 24e6 / 1e10)  # memory-bound at batch 2
    big = compute.step_time_models(1e6, 4096, 0.0, peak_flops=1e11, bandwidth=1e10)
    assert big["roofline"] == pytest.approx(big["compute only"])


def test_kernel_roofline_adds_each_kernels_own_bound():
    # batch 2: every product waits on its bytes, so the sum is the step's bytes (products, ReLUs, update) at B
    w, n_params = 1024, 64 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10
    prods = compute.mlp_step_products(2, w)
    product_bytes = sum(4 * (m * k + k * n + m * n) for m, k, n in prods.values())
    small = compute.kernel_roofline_s(2, w, peak_flops=1e15, bandwidth=1e10)
    assert small == pytest.approx((product_bytes + 2 * 20 * 2 * w + 12 * n_params) / 1e10)
    # a huge batch: the products' FLOPs at P, plus the bytes no product hides (ReLUs, update)
    big = compute.kernel_roofline_s(1 << 16, w, peak_flops=1e9, bandwidth=1e12)
    flops = sum(2 * m * k * n for m, k, n in compute.mlp_step_products(1 << 16, w).values())
    assert big == pytest.approx(flops / 1e9 + (2 * 20 * (1 << 16) * w + 12 * n_params) / 1e12)
    # never below the whole-step roofline's larger term less the fixed cost, and above it near the ridge
    for b in (2, 32, 2048):
        whole = compute.step_time_models(n_params, b, 0.0, 3e11, 4e10)["roofline"]
        assert compute.kernel_roofline_s(b, w, 3e11, 4e10) >= 0.9 * whole
    with pytest.raises(ValueError):
        compute.kernel_roofline_s(0, w, 1e9, 1e9)


def test_worst_miss_counts_both_ways():
    assert compute.worst_miss([1.0, 4.0], [2.0, 2.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        compute.worst_miss([], [])


def test_one_fma_chips_and_caveats():
    assert peak.fp32_flops_per_cycle("AVX-512", "GenuineIntel", 6, model="11th Gen Intel(R) Core(TM) i7-1165G7") == 32
    assert peak.fp32_flops_per_cycle("AVX-512", "AuthenticAMD", 26, model="AMD Ryzen AI 9 HX 370") == 32
    assert peak.fp32_flops_per_cycle("AVX-512", "AuthenticAMD", 26, model="AMD Ryzen 9 9950X") == 64
    assert peak.fp32_flops_per_cycle("AVX-512", "AuthenticAMD", 26, model="AMD RYZEN AI MAX+ 395 w/ Radeon 8060S") == 64
    assert peak.fp32_flops_per_cycle("AVX-512", "GenuineIntel", 6, model="Intel(R) Xeon(R) Platinum 8480+") == 64
    assert peak.sheet_peak_caveat("Linux", False, 2.5, 32) == ""
    assert "base clock" in peak.sheet_peak_caveat("Windows", False, 2.5, 32)
    assert "efficiency" in peak.sheet_peak_caveat("Linux", True, 2.5, 32)
    assert peak.sheet_peak_caveat("Linux", False, None, 32)


@pytest.mark.parametrize(
    "model, units",
    [
        ("Intel(R) Xeon(R) Silver 4114 CPU @ 2.20GHz", 1),  # Skylake-SP
        ("Intel(R) Xeon(R) Silver 4214R CPU @ 2.40GHz", 1),  # Cascade Lake
        ("Intel(R) Xeon(R) Bronze 3204 CPU @ 1.90GHz", 1),
        ("Intel(R) Xeon(R) Gold 5118 CPU @ 2.30GHz", 1),
        ("Intel(R) Xeon(R) Gold 5218R CPU @ 2.10GHz", 1),
        ("Intel(R) Xeon(R) Gold 5122 CPU @ 3.60GHz", 2),  # the two Gold 5xxx exceptions
        ("Intel(R) Xeon(R) Gold 5222 CPU @ 3.80GHz", 2),
        ("Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz", 2),
        ("Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz", 2),  # Ice Lake-SP
        ("Intel(R) Xeon(R) Gold 5318Y CPU @ 2.10GHz", 2),
        ("Intel(R) Xeon(R) Silver 4410Y", 2),  # Sapphire Rapids
        ("Intel(R) Xeon(R) Gold 5415+", 2),
        ("Intel(R) Xeon(R) Platinum 8280 CPU @ 2.70GHz", 2),
        ("Intel(R) Core(TM) i7-1065G7 CPU @ 1.30GHz", 1),  # Ice Lake client
    ],
)
def test_avx512_fma_units_by_xeon_generation(model, units):
    assert peak.one_avx512_fma_unit(model, "GenuineIntel", 6) == (units == 1)
    assert peak.fp32_flops_per_cycle("AVX-512", "GenuineIntel", 6, model=model) == 32 * units


def test_mlp_step_products_add_up_to_the_step_flops():
    from course_lib import models

    b, w = 8, 32
    products = compute.mlp_step_products(b, w)
    assert products["weight gradient, layer 2"] == (w, b, w)  # inner dimension = batch
    assert len(products) == 8  # 3 forward, 2 input gradients (none for the first layer), 3 weight gradients
    flops = sum(2 * m * k * n for m, k, n in products.values())
    weights = sum(p.numel() for name, p in models.MLP(64, [w, w], 10).named_parameters() if "weight" in name)
    assert flops == 6 * weights * b - 2 * b * 64 * w  # 6Nb over the weights, less layer 1's input gradient
    with pytest.raises(ValueError):
        compute.mlp_step_products(0, w)


def test_minor_faults_per_call_counts_fresh_pages():
    import torch

    faults = compute.minor_faults_per_call(lambda: torch.empty(16 * 2**20).fill_(1.0), calls=3)  # 64 MiB, fresh
    if faults is not None:  # counted on Linux and macOS
        assert faults > 1000
        assert compute.minor_faults_per_call(lambda: None, calls=3) < 50


def test_intensity_with_activations_counts_both():
    n, acts = 1_000_000, 4000
    # 6Nb FLOPs over 24N weight bytes + 4 touches x 4 bytes x b x acts
    assert compute.training_step_intensity_with_activations(n, 2048, acts) == pytest.approx(
        6 * n * 2048 / (24 * n + 16 * 2048 * acts)
    )
    for b in (2, 8, 2048):
        assert compute.training_step_intensity_with_activations(n, b, acts) < compute.training_step_intensity(b)
    # small batch: the weights dominate (within 1 %); large batch: activations cut the intensity several-fold
    assert compute.training_step_intensity_with_activations(n, 2, acts) > 0.99 * compute.training_step_intensity(2)
    assert compute.training_step_intensity_with_activations(n, 2048, acts) < compute.training_step_intensity(2048) / 3
    with pytest.raises(ValueError, match="activation_values"):
        compute.training_step_intensity_with_activations(n, 8, 0)


def test_rank1_update_bytes_counts_one_write_then_read_write_per_update():
    assert compute.rank1_update_bytes(1024, 1024, 1) == 4 * 2**20  # the output written once
    assert compute.rank1_update_bytes(1024, 1024, 2) == 12 * 2**20  # + one read and one write
    assert compute.rank1_update_bytes(10, 10, 3, dtype="bf16") == 5 * 100 * 2
    with pytest.raises(ValueError):
        compute.rank1_update_bytes(10, 10, 0)


def test_thin_product_forms_compute_the_same_product():
    import torch

    for k in (1, 2, 5):
        fns = compute.thin_product_forms(16, k, 8)
        blas, rank1 = fns["BLAS product"](), fns["rank-1 updates"]()
        assert blas.shape == rank1.shape == (16, 8)
        assert torch.allclose(blas, rank1, atol=1e-5)
        assert rank1.abs().sum() > 0


def test_thin_product_times_both_forms_beside_the_model():
    t = compute.thin_product(2, 64, bandwidth=1e10, rounds=1)
    assert t.shape == (64, 2, 64)
    assert t.blas_s > 0 and t.rank1_s > 0
    assert t.model_s == pytest.approx(3 * 64 * 64 * 4 / 1e10)
    assert t.bandwidth == 1e10
    with pytest.raises(ValueError):
        compute.thin_product(2, 64, bandwidth=0)


def test_thin_product_takes_b_from_a_copy_timed_among_the_forms():
    import torch

    src, dst = torch.ones(4096), torch.empty(4096)
    t = compute.thin_product(2, 64, bandwidth=1.0, rounds=1, copy=(lambda: dst.copy_(src), 8 * 4096))
    assert t.bandwidth > 1e6  # the copy's B, not the 1 byte/s passed in
    assert t.model_s == pytest.approx(3 * 64 * 64 * 4 / t.bandwidth)


def test_text_table_aligns_columns_and_formats_numbers():
    from course_lib import plots

    text = plots.text_table(
        [
            {"chip": "a", "TFLOP/s": 989.4, "W": None, "GB/s": 1008.0},
            {"chip": "longer", "TFLOP/s": 8.1, "W": 8960, "GB/s": 2.5},
        ],
        formats={"TFLOP/s": ".0f"},
    )
    lines = text.splitlines()
    assert lines[0].split() == ["chip", "TFLOP/s", "W", "GB/s"]
    assert lines[1].split() == ["a", "989", "-", "1008"] and lines[2].split() == ["longer", "8", "8960", "2.5"]
    assert len({len(line) for line in lines}) == 1  # aligned
    with pytest.raises(TypeError):
        plots.text_table([])
    with pytest.raises(ValueError):
        plots.text_table([{"a": 1}, {"b": 2}])


def test_describe_caches_says_what_fits():
    from course_lib.hardware import processor

    line = processor.describe_caches({"L1d": 32 * 2**10, "L3": 32 * 2**20}, 9 * 2**20, "weights")
    assert line == "caches: L1d 32 KiB, L3 32 MiB; weights fit in the last level"
    assert "do not fit" in processor.describe_caches({"L2": 2**20}, 2**21)
    assert processor.describe_caches({}, 1) == "caches: unknown here"


def test_step_parts_table_lists_the_slowest_parts_with_shapes():
    from course_lib import plots

    roof = compute.StepRoofline(
        batches=(2, 8),
        width=1024,
        sweep=None,
        fixed_s=1e-4,
        step_s=(1e-3, 2e-3),
        models={},
        parts={2: {"weight gradient, layer 2": 4e-4, "update": 6e-5, "forward, layer 1": 1e-6}},
        faults_per_step=None,
    )
    lines = plots.step_parts_table(roof, peak_flops=1e11, top=2).splitlines()
    assert len(lines) == 3 and "weight gradient, layer 2" in lines[1] and "(1024 x 2) @ (2 x 1024)" in lines[1]
    assert "10.5%" in lines[1]  # 2 x 1024 x 2 x 1024 FLOPs in 400 us at 100 GFLOP/s
    assert "update" in lines[2] and "12 bytes per parameter" in lines[2]
    with pytest.raises(TypeError):
        plots.step_parts_table(object(), 1e11)


def test_sheet_peak_caveat_for_too_little_work_per_core():
    from course_lib.hardware import peak

    s = peak.SheetPeak(1e11, 16, 2.5, 32, "")
    assert s.caveat_for(2048) == "16 cores share the 2048-example step, 128 each: too little work per core"
    assert peak.SheetPeak(1e11, 8, 2.5, 32, "").caveat_for(2048) == ""
    assert peak.SheetPeak(1e11, 16, 2.5, 32, "Windows").caveat_for(2048) == "Windows"


def test_duration_bars_label_readable_durations():
    from course_lib import plots

    fig, ax = plots.duration_bars({"a": 1.5, "b": 150.0}, title="t", xlabel="x")
    assert [t.get_text() for t in ax.texts] == ["1.5 h", "6.25 days"]
    assert ax.get_ylim()[1] >= 8 * 150
    with pytest.raises(ValueError):
        plots.duration_bars({"a": 0.0}, title="t", xlabel="x")
