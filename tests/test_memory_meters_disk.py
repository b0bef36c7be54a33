"""The allocator meter, the estimator's plausible bugs, and epochs with the page cache kept or evicted (notebook 02)."""

from __future__ import annotations

import os

import pytest
import torch

from course_lib import memory, models
from course_lib.memory import streaming

MiB = 2**20


def _mlp():
    torch.manual_seed(0)
    return models.MLP(32, [256, 256], 10), torch.randn(256, 32), torch.randint(0, 10, (256,))


def test_the_allocator_meter_agrees_with_the_estimate_and_sees_what_it_allocates():
    model, x, y = _mlp()
    est = memory.estimate_training_memory(model, x, "adam", target=y)
    alloc = memory.measure_allocator_peak(model, x, y, "adam", steps=2)
    if alloc is None:
        pytest.skip("this PyTorch's profiler reports no allocation events")
    assert alloc == pytest.approx(est.total, rel=0.05)
    # a 4-MiB tensor made and dropped inside fn shows in the peak, on top of what was live before
    extra = memory.allocator_peak(lambda: torch.empty(MiB, dtype=torch.float32).fill_(1), include=[x])
    assert extra >= 4 * MiB + x.numel() * 4


def test_each_plausible_bug_misses_the_meter_by_more_than_the_lesson_bound():
    torch.manual_seed(0)  # the lesson's MLP: 64 -> 1024 -> 1024 -> 10, batch 2048, Adam
    model, x, y = models.MLP(64, [1024, 1024], 10), torch.randn(2048, 64), torch.randint(0, 10, (2048,))
    est = memory.estimate_training_memory(model, x, "adam", target=y)
    bugs = memory.plausible_bugs(est)
    assert set(bugs) == {
        "the parts added up, no phases",
        "activations forgotten",
        "activation gradients forgotten",
        "optimizer state forgotten",
        "model states at 2 bytes per value",
        "the batch forgotten",
    }
    assert bugs["the batch forgotten"] == est.total - est.batch
    assert bugs["optimizer state forgotten"] == est.total - est.optimizer_state
    # the backward pass without the activation gradients: at least what is held at the peak without them
    parts = dict(est.peak_parts)
    assert est.total - parts["activation gradients"] <= bugs["activation gradients forgotten"] < est.total
    # the lesson's float32 bound (0.5 %) rejects each; the batch (0.5 MiB of 49) is the smallest
    assert all(abs(b / est.total - 1) > 0.008 for b in bugs.values()), bugs
    with pytest.raises(TypeError, match="MemoryEstimate"):
        memory.plausible_bugs(123)
    # a claim's no-effect value must lie outside its bound: with a bound, the closest wrong estimate it rejects
    _, closest, miss, misses = memory.estimator_misses([(est, est.total)])
    assert closest == "the batch forgotten" and miss < 15  # inside the GPU check's 15 %: no use as its no-effect
    _, closest15, miss15, _ = memory.estimator_misses([(est, est.total)], 15)
    assert miss15 > 15 and miss15 == min(m for m in misses.values() if m > 15)
    with pytest.raises(ValueError, match="bound"):
        memory.estimator_misses([(est, est.total)], -1)


def test_bad_input_names_the_argument():
    with pytest.raises(TypeError, match="fn"):
        memory.allocator_peak(42)
    with pytest.raises(ValueError, match="steps"):
        memory.measure_allocator_peak(*_mlp(), steps=0)
    with pytest.raises(ValueError, match="wanted"):
        streaming.demo_dataset_bytes(0, ".")


def test_demo_size_is_bounded_by_free_space(tmp_path):
    size = streaming.demo_dataset_bytes(64 * MiB, tmp_path)
    assert 0 <= size <= 64 * MiB and size % MiB == 0
    assert streaming.demo_dataset_bytes(10**18, tmp_path) < 10**18  # never the whole disk


def test_an_evicted_epoch_reads_the_disk_where_the_os_lets_us_drop_the_cache(tmp_path):
    path = streaming.write_synthetic_dataset(tmp_path / "d", n_samples=16 * MiB // 128, n_features=32)
    e = streaming.epochs_cached_vs_evicted(path, rounds=2)
    assert e.nbytes == 16 * MiB and e.cached_seconds > 0 and e.evicted_seconds > 0
    assert e.method == streaming.cache_control()
    if e.method is None:  # Windows: nothing can be dropped, and the result says so
        assert not e.evicted
    elif os.sys.platform.startswith("linux") and e.evicted:
        assert e.cached_fraction_before is not None and e.cached_fraction_before < 0.05
    with pytest.raises(ValueError):
        streaming.epochs_cached_vs_evicted(tmp_path)


def test_epoch_models_read_ahead_takes_the_longer_part_read_then_compute_adds():
    e = streaming.EpochTimes(100, 0.02, 0.09, 1000.0, 10000.0, "posix_fadvise", True, 0.0)
    assert e.read_seconds == pytest.approx(0.1) and e.overlapped_seconds == pytest.approx(0.1)
    assert e.additive_seconds == pytest.approx(0.02 + 0.1 - 0.01)
    assert e.predicted_slowdown == pytest.approx(5.0) and e.over_overlapped == pytest.approx(0.9)
    fast_disk = streaming.EpochTimes(100, 0.5, 0.5, 1000.0, 10000.0, "posix_fadvise", True, 0.0)
    assert fast_disk.predicted_slowdown == pytest.approx(1.0)  # compute hides the whole read
