import math

import pytest
import torch

from course_lib import classical_ml, compute, timing


def test_time_fn_reports_a_low_quantile_and_the_spread():
    x = torch.randn(256, 256)
    t = timing.time_fn(lambda: x @ x, label="mm", min_run_time=0.02)
    assert 0 < t.min_s <= t.seconds <= t.median_s and t.repeats >= 1 and t.spread >= 0
    assert t.num_threads == torch.get_num_threads() and "mm" in str(t)


def test_the_low_quantile_ignores_interference():
    # three of ten repetitions hit by another program: the reported time is the undisturbed one
    times = [1.0] * 7 + [10.0, 20.0, 30.0]
    assert timing.representative(times) == timing.quantile(times, timing.LOW_QUANTILE) == 1.0
    assert timing.representative([3.0, 1.0, 2.0]) == pytest.approx(1.4)  # 3 repeats: past the fastest
    assert "slower" in timing.representative.__doc__  # the policy, stated where it lives
    with pytest.raises(ValueError):
        timing.representative([])
    assert (
        timing.relative_spread(times) > timing.NOISY_SPREAD
        and timing.relative_spread([1.0, 1.1, 1.05]) < timing.NOISY_SPREAD
    )


def test_time_fn_orders_work():
    small, big = torch.randn(32, 32), torch.randn(384, 384)
    r = timing.compare_interleaved(
        {"small": lambda: small @ small, "big": lambda: big @ big}, rounds=3, min_run_time=0.02
    )
    # 384^3 / 32^3 = 1728x more arithmetic; even with call overhead the big one is far slower
    assert r["big"].seconds > 5 * r["small"].seconds, (r["big"], r["small"])


def test_bad_timing_arguments():
    with pytest.raises(TypeError):
        timing.time_fn(42)
    with pytest.raises(ValueError, match="min_run_time"):
        timing.time_fn(lambda: None, min_run_time=-1)
    with pytest.raises(ValueError, match="num_threads"):
        timing.time_fn(lambda: None, num_threads=0)
    with pytest.raises(ValueError, match="fns"):
        timing.compare_interleaved({})
    with pytest.raises(ValueError, match="threads"):
        with timing.num_threads_set(0):
            pass


def test_num_threads_restored():
    before = torch.get_num_threads()
    with timing.num_threads_set(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_flop_counting_matches_formula():
    a, b = torch.randn(12, 7), torch.randn(7, 5)
    assert timing.count_flops(torch.mm, a, b) == timing.matmul_flops(12, 5, 7) == 2 * 12 * 5 * 7
    lin = torch.nn.Linear(16, 8)
    assert timing.count_flops(lin, torch.randn(4, 16)) == 2 * 4 * 16 * 8


def test_rates_and_dtypes():
    assert timing.achieved_flops(2e9, 0.01) == pytest.approx(2e11)
    assert timing.achieved_bandwidth(1e9, 0.5) == pytest.approx(2e9)
    assert timing.format_rate(1.8e11) == "180 GFLOP/s"
    assert timing.format_seconds(1.2e-5) == "12 us"
    assert timing.bytes_per_element("bf16") == 2 and timing.bytes_per_element(torch.float32) == 4
    with pytest.raises(ValueError, match="accepted values"):
        timing.to_dtype("fp12")
    for bad in (
        (timing.achieved_flops, (1, 0)),
        (timing.achieved_bandwidth, (-1, 1)),
        (timing.matmul_flops, (0, 1, 1)),
    ):
        with pytest.raises(ValueError):
            bad[0](*bad[1])


def fixed_timing(seconds):
    def fake(fn, **kwargs):
        fn()  # the operation still runs once
        return timing.Timing("fake", seconds, seconds, seconds, 0.0, 1, 1, "cpu")

    return fake


def test_throughput_sweep_runs_on_the_threads_asked():
    threads_seen = []
    real_mm = torch.mm

    def spy(*args, **kwargs):
        threads_seen.append(torch.get_num_threads())
        return real_mm(*args, **kwargs)

    before = torch.get_num_threads()
    try:
        torch.mm = spy
        timing.matmul_throughput([8], num_threads=1, min_run_time=0.001)
    finally:
        torch.mm = real_mm
    assert threads_seen and set(threads_seen) == {1}
    assert torch.get_num_threads() == before


def test_throughput_sweep_counts_2n3_flops(monkeypatch):
    monkeypatch.setattr(timing, "time_fn", fixed_timing(0.5))
    pts = timing.matmul_throughput([8, 128])
    assert [p.size for p in pts] == [8, 128]
    assert [p.flops_per_s for p in pts] == [2 * 8**3 / 0.5, 2 * 128**3 / 0.5]
    with pytest.raises(ValueError):
        timing.matmul_throughput([])
    with pytest.raises(TypeError):
        timing.matmul_throughput([8.5])
    with pytest.raises(ValueError):
        timing.matmul_throughput([8], num_threads=0)
    with pytest.raises(ValueError):
        timing.memory_bandwidth(10)


def test_intensity_formulas():
    assert compute.matmul_intensity(1024, 1024, 1024) == pytest.approx(1024 / 6)
    assert compute.matmul_intensity(2, 2, 2, "bf16") == pytest.approx(16 / 24)
    assert compute.elementwise_intensity() == pytest.approx(1 / 12)
    with pytest.raises(ValueError):
        compute.matmul_intensity(0, 1, 1)
    with pytest.raises(ValueError, match="dtype"):
        compute.matmul_intensity(1, 1, 1, "fp7")


def test_roofline():
    assert compute.roofline(1.0, peak_flops=100.0, bandwidth=10.0) == 10.0
    assert compute.roofline(100.0, peak_flops=100.0, bandwidth=10.0) == 100.0
    assert compute.ridge_point(100.0, 10.0) == 10.0
    assert compute.roofline_time(1e9, 1e6, 1e9, 1e9) == 1.0
    with pytest.raises(ValueError, match="bandwidth"):
        compute.roofline(1.0, 1.0, -1.0)
    with pytest.raises(TypeError):
        compute.roofline("1", 1.0, 1.0)


def test_training_time():
    assert compute.training_flops(1e9, 1e10) == 6e19
    s = compute.time_to_train(1e9, 1e10, peak_flops=1e15, utilization=0.5, n_devices=4)
    assert s == pytest.approx(6e19 / (4 * 1e15 * 0.5))
    for kwargs in ({"utilization": 0}, {"utilization": 1.5}, {"n_devices": 0}):
        with pytest.raises(ValueError):
            compute.time_to_train(1e9, 1e10, 1e15, **kwargs)
    with pytest.raises(ValueError, match="n_params"):
        compute.training_flops(-1, 10)
    rows = compute.time_to_train_table(124e6, 2.5e9, dtype="bf16")
    assert rows and all(math.isfinite(r.seconds) for r in rows)
    assert "T4" not in " ".join(r.accelerator for r in rows)  # T4 has no bf16
    with pytest.raises(ValueError):
        compute.time_to_train_table(1e6, 1e6, names=["t4"], dtype="bf16")
    assert compute.format_duration(4000) == "1.11 h"
    assert compute.overhead_model_time(10.0, 1.0, 5.0) == 3.0


@pytest.mark.parametrize("kernel, arrays", [("copy", 2), ("scale", 2), ("add", 3), ("triad", 3)])
def test_stream_kernels_count_every_array_once(monkeypatch, kernel, arrays):
    monkeypatch.setattr(timing, "time_fn", fixed_timing(0.25))
    assert timing.stream_bandwidth(4 * 2**20, kernel=kernel) == arrays * 4 * 2**20 / 0.25


def test_stream_kernels_run_and_agree():
    bw = {k: timing.stream_bandwidth(4 * 2**20, kernel=k, min_run_time=0.02) for k in timing.STREAM_KERNELS}
    assert all(math.isfinite(v) and v > 0 for v in bw.values()), bw
    # all four are memory-bound, so their bandwidths agree far better than their FLOPs (0 to 2 per element)
    assert max(bw.values()) < 5 * min(bw.values()), bw


def test_stream_and_host_copies_reject_bad_input():
    with pytest.raises(ValueError, match="accepted values"):
        timing.stream_bandwidth(kernel="daxpy")
    with pytest.raises(ValueError, match="'gpu' is not known"):
        timing.stream_bandwidth(2**20, device="gpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: host-to-device copies work here")
def test_host_copies_need_cuda():
    with pytest.raises(ValueError, match="CUDA"):
        timing.host_to_device_bandwidth(2**20, device="cpu")


def test_wrong_types_get_type_errors():
    with pytest.raises(TypeError, match="flops"):
        timing.achieved_flops("1e9", 1)
    with pytest.raises(ValueError, match="'gpu' is not known"):
        timing.time_fn(lambda: None, device="gpu")
    with pytest.raises(TypeError, match="min_run_time"):
        timing.time_fn(lambda: None, min_run_time="0.1")


def test_roofline_regime_and_memory_bound_split_at_the_ridge():
    assert compute.roofline_regime(1 / 12, 400e9, 20e9) == (pytest.approx(20e9 / 12), "memory")
    assert compute.roofline_regime(20.0, 400e9, 20e9) == (400e9, "compute")  # exactly the ridge: compute
    assert compute.roofline_regime(170.0, 400e9, 20e9) == (400e9, "compute")
    ops = {
        "add": 1 / 12,
        "matmul 256": compute.matmul_intensity(256, 256, 256),
        "matmul 4096": compute.matmul_intensity(4096, 4096, 4096),
    }
    assert compute.memory_bound(ops, 19.5e12, 2.039e12) == {"add"}  # A100 fp32: ridge ~10 FLOP/byte
    assert compute.memory_bound({}, 1.0, 1.0) == set()
    with pytest.raises(TypeError, match="intensities"):
        compute.memory_bound([("add", 0.1)], 1.0, 1.0)
    with pytest.raises(ValueError, match="intensity"):
        compute.roofline_regime(0.0, 1.0, 1.0)


def test_days_to_train_takes_tflops():
    assert compute.days_to_train(1e9, 1e10, 100, 0.5, 1) == pytest.approx(6e19 / 50e12 / 86400)
    assert compute.days_to_train(1e9, 20e9, 312, 0.4, 8) == pytest.approx(1.3911, rel=1e-4)
    with pytest.raises(ValueError, match="peak_tflops"):
        compute.days_to_train(1e9, 1e10, 0, 0.5, 1)


def test_logreg_flops_counts_two_products_per_iteration():
    # digits: 1,348 rows x (64 features + intercept) x 10 classes, scores and gradient.
    assert classical_ml.logreg_flops(1348, 64, 10) == 2 * 2 * 1348 * 65 * 10
    assert classical_ml.logreg_flops(10, 3, 2, iterations=5, fit_intercept=False) == 5 * 4 * 10 * 3 * 2
    with pytest.raises(ValueError, match="iterations"):
        classical_ml.logreg_flops(10, 3, 2, iterations=0)
    with pytest.raises(TypeError, match="fit_intercept"):
        classical_ml.logreg_flops(10, 3, 2, fit_intercept="yes")


def test_logreg_evaluation_steps_are_the_evaluation_taken_apart():
    import numpy as np

    rng = np.random.default_rng(1)
    x = np.hstack([rng.normal(size=(50, 4)), np.ones((50, 1))]).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 50)]
    steps = classical_ml.logreg_evaluation_steps(x, y)
    assert len(steps) == 12 and "row max, 3 wide" in steps
    assert sum("(a product)" in name for name in steps) == 2  # the two products logreg_flops counts
    loss = steps["loss: log, Z * Y, row sum, mean"]()
    assert 0 < loss < 2 * np.log(3)  # near log(3): small weights, scores almost equal
    assert steps["gradient X^T (P - Y) / n (a product)"]().shape == (5, 3)
    with pytest.raises(TypeError, match="numpy"):
        classical_ml.logreg_evaluation_steps(x.tolist(), y)
    with pytest.raises(ValueError, match="rows"):
        classical_ml.logreg_evaluation_steps(x, y[:10])
    with pytest.raises(ValueError, match="dtype"):
        classical_ml.logreg_evaluation_steps(x, y.astype(np.float64))


def test_line_through_two_measurements():
    fixed, slope = classical_ml.line_through(5, 0.010, 40, 0.045)
    assert fixed == pytest.approx(0.005) and slope == pytest.approx(0.001)
    with pytest.raises(ValueError, match="differ"):
        classical_ml.line_through(5, 1.0, 5, 2.0)
    with pytest.raises(TypeError):
        classical_ml.line_through("5", 1.0, 6, 2.0)


def test_scale_table_per_chip_pod_and_dollar():
    rows = compute.scale_table(124e6, 2.5e9, ["h100-sxm", "tpu-v5p"], usd_per_chip_hour={"H100": 6.88, "v5p": 4.2})
    h100, v5p = rows
    assert h100.chip_tflops > v5p.chip_tflops and h100.job_hours < v5p.job_hours  # per chip the H100 wins
    assert v5p.pod_chips == 8960 and v5p.pod_pflops == pytest.approx(459 * 8960 / 1e3)
    assert v5p.pod_pflops > 100 * h100.pod_pflops and v5p.link_gbs == 600 and h100.link_gbs == 450
    assert h100.tflops_per_usd_hour == pytest.approx(989.4 / 6.88)
    assert v5p.job_usd == pytest.approx(v5p.job_hours * 4.2)
    no_price = compute.scale_table(1e6, 1e6, ["a100-80gb"])[0]
    assert no_price.usd_per_chip_hour is None and no_price.job_usd is None and no_price.tflops_per_usd_hour is None
    with pytest.raises(ValueError, match="bf16"):
        compute.scale_table(1e6, 1e6, ["t4", "h100-sxm"])  # the T4 has no bf16 peak
    with pytest.raises(ValueError, match="usd_per_chip_hour"):
        compute.scale_table(1e6, 1e6, ["h100-sxm"], usd_per_chip_hour={"h100-sxm": 0})
    with pytest.raises(ValueError, match="names"):
        compute.scale_table(1e6, 1e6, [])
    with pytest.raises(ValueError, match="accelerator"):
        compute.scale_table(1e6, 1e6, ["h100-sxm"], usd_per_chip_hour={"tpu-v9": 1.0})


def test_svm_and_the_6nd_rule_as_notebook_01_prints_them():
    """Computed, not measured: the SVM's accuracy on the fixed digits split, and PyTorch's FLOP counter against 6ND
    on the course's tiny transformer and on the MLP of notebook 01's training step."""
    from sklearn.svm import SVC

    from course_lib import data, models, train

    d = data.load_digits()
    assert SVC().fit(d.x_train.numpy(), d.y_train.numpy()).score(d.x_test.numpy(), d.y_test.numpy()) >= 0.95
    torch.manual_seed(0)
    tiny = models.TinyTransformer(vocab_size=32, seq_len=16, d_model=64, n_layers=2)
    tok = torch.randint(0, 32, (64, 16))
    counted = timing.count_flops(train.make_step_fn(tiny, tok, torch.randint(0, 2, (64,))))
    assert 0.75 < counted / compute.training_flops(models.count_parameters(tiny), tok.numel()) < 1.25
    mlp = models.MLP(64, [1024, 1024], 10)
    n = models.count_parameters(mlp)
    for b in (8, 64):
        step = train.make_step_fn(mlp, torch.randn(b, 64), torch.randint(0, 10, (b,)), optimizer="sgd", lr=1e-3)
        assert timing.count_flops(step) / (6 * n * b) == pytest.approx(0.979, abs=0.003)


def test_evaluations_in_fit_counts_the_solvers_calls_inside_a_fit():
    import numpy as np
    import scipy.optimize
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(200, 5)), rng.integers(0, 3, 200)
    ev = classical_ml.evaluations_in_fit(lambda: LogisticRegression(max_iter=200).fit(x, y), repeats=2)
    assert ev is not None and ev.evaluations >= ev.iterations >= 1  # a rejected step costs one more
    assert 0 < ev.share <= 1 and ev.per_evaluation_s > 0
    by_hand = classical_ml.evaluations_in_fit(
        lambda: scipy.optimize.minimize(lambda w: float((w**2).sum()), np.ones(3))
    )
    assert by_hand is not None and by_hand.evaluations > 1
    assert classical_ml.evaluations_in_fit(lambda: None) is None  # no solver called: nothing to count
    with pytest.raises(TypeError, match="fit"):
        classical_ml.evaluations_in_fit(3)
    with pytest.raises(ValueError, match="repeats"):
        classical_ml.evaluations_in_fit(lambda: None, repeats=0)


def test_fork_join_cost_splits_one_add():
    t1, tp, s = timing.fork_join_cost(1, rounds=2)
    assert t1 > 0 and tp > 0 and s >= 0
    with pytest.raises(ValueError, match="threads"):
        timing.fork_join_cost(0)


def test_fork_join_held_out_times_one_grain_and_four_per_thread():
    held = timing.fork_join_held_out(2, 5e-6, rounds=1)
    assert sorted(held) == [2 * 32768, 4 * 2 * 32768]  # sizes PyTorch splits over both threads
    for h in held.values():
        assert h["t1"] > 0 and h["tp"] > 0
        assert h["model"] == pytest.approx(h["t1"] / 2 + 5e-6)
        assert h["split_free"] == pytest.approx(h["t1"] / 2)
    with pytest.raises(ValueError, match="threads"):
        timing.fork_join_held_out(1, 0.0)
    with pytest.raises(ValueError, match="split_s"):
        timing.fork_join_held_out(2, -1.0)
