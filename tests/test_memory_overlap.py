"""Section 9's read-ahead epochs, section 7a's steady-state accumulation meter, section 6's arena cap and
section 10's table header (notebook 02)."""

from __future__ import annotations

import pytest
import torch

from course_lib import memory, models
from course_lib.memory import glibc_heap, overlap, streaming
from course_lib.memory.overlap import PrefetchedEpochs

MiB = 2**20


def _mlp(batch=512):
    torch.manual_seed(0)
    return models.MLP(64, [256, 256], 10), torch.randn(batch, 64), torch.randint(0, 10, (batch,))


def test_accumulation_is_metered_in_steady_state_and_splits_the_activations():
    one = memory.measure_training_memory(*_mlp(), optimizer="adam", steps=2).live_bytes
    first_step_only = memory.measure_training_memory(*_mlp(), optimizer="adam", steps=1).live_bytes
    four = memory.measure_training_memory(*_mlp(), optimizer="adam", steps=2, micro_batches=4).live_bytes
    assert one > first_step_only  # Adam's state, made in step one, is alive in step two's backward
    assert four < one
    with pytest.raises(ValueError, match="micro_batches"):
        memory.measure_training_memory(*_mlp(), micro_batches=0)


def _epochs(cached, evicted, reads, evicted_ok=True, fraction=0.0):
    return PrefetchedEpochs(100 * MiB, 32, cached, evicted, tuple(reads), evicted_ok, cached_fraction_before=fraction)


def test_the_two_models_of_an_evicted_epoch_and_when_they_are_judged():
    e = _epochs(0.09, 0.1, [0.08, 0.1, 0.12])
    assert e.read_median == pytest.approx(0.1)
    assert e.max_model == pytest.approx(0.1) and e.sum_model == pytest.approx(0.19)
    assert e.over_max == pytest.approx(1.0)
    if streaming.cache_control() is not None:
        assert e.why_not_judged() == ""
        assert "close" in _epochs(0.01, 0.1, [0.1]).why_not_judged()  # compute not sized: the models agree
        assert "close" in _epochs(0.055, 0.1, [0.1]).why_not_judged()  # 1.55x apart: the band would reach 1.3
        assert "cached" in _epochs(0.09, 0.1, [0.1], evicted_ok=False, fraction=0.9).why_not_judged()
        assert "90%" in _epochs(0.09, 0.1, [0.1], evicted_ok=False, fraction=0.9).why_not_judged()
        assert "no mincore" in _epochs(0.09, 0.1, [0.1], evicted_ok=False, fraction=None).why_not_judged()
    else:
        assert "Windows" in e.why_not_judged()


def test_the_check_compares_medians_like_with_like():
    """A fast outlier among the evicted epochs must not pull the measurement to the model: medians, as the reads."""
    e = PrefetchedEpochs(100 * MiB, 32, 0.05, 0.05, (0.1, 0.1, 0.1), True, (0.05, 0.09, 0.09), (0.05, 0.15, 0.16), 0.0)
    assert e.cached_median == pytest.approx(0.09) and e.evicted_median == pytest.approx(0.15)
    assert e.max_model == pytest.approx(0.1) and e.sum_model == pytest.approx(0.19)
    assert e.over_max == pytest.approx(1.5)  # the fastest evicted epoch alone would give 0.5


def test_prefetched_epochs_size_the_compute_and_time_every_read(tmp_path):
    path = streaming.write_synthetic_dataset(tmp_path / "d", n_samples=8 * MiB // 256, n_features=64)
    e = overlap.prefetched_epochs(path, rounds=2)
    assert 8 <= e.width <= 16384
    assert len(e.read_seconds) == 3 + 2 and all(r > 0 for r in e.read_seconds)
    assert e.cached_seconds > 0 and e.evicted_seconds > 0
    assert len(e.cached_rounds) == len(e.evicted_rounds) == 2 and e.evicted_median >= e.evicted_seconds
    if e.evicted:  # verified only where mincore measured the share cached before every evicted epoch
        assert e.cached_fraction_before is not None and e.cached_fraction_before < 0.05
    assert e.sum_model > e.max_model
    with pytest.raises(ValueError, match="rounds"):
        overlap.prefetched_epochs(path, rounds=0)


def test_the_arena_cap_and_the_table_header():
    assert isinstance(glibc_heap.cap_arenas(2), bool)
    in_use = glibc_heap.glibc_malloc_in_use()  # section 4 judges glibc's books only where its malloc is the one used
    assert isinstance(in_use, bool)
    if not in_use:
        assert glibc_heap.malloc_counts() is None
    with pytest.raises(ValueError, match="n"):
        glibc_heap.cap_arenas(0)
    table = memory.largest_model_table([("t4", "NVIDIA T4", 16, 0.8e9)])
    assert "16-bit mixed" in table and "bf16" not in table  # the T4 (Turing) has no bf16


def test_stream_once_meters_by_sampling_where_the_peak_cannot_be_reset(tmp_path, monkeypatch):
    """macOS and Windows: no VmHWM reset, so section 8 reads psutil's rss sampled every millisecond."""
    from course_lib.memory import meters

    # 64 MiB: above glibc's largest mmap threshold (32 MiB), so the load gets fresh pages, not blocks that earlier
    # tests freed and glibc kept (with a 32-MiB file that made the growth depend on the tests run before)
    path = streaming.write_synthetic_dataset(tmp_path / "d", n_samples=64 * MiB // 256, n_features=64)
    monkeypatch.setattr(meters, "reset_peak_rss", lambda: False)
    # in a long test session glibc may hold a free region of 64 MiB that earlier tests left, already resident: the
    # load would reuse it and the resident set not grow. malloc_trim hands such pages back first
    from course_lib.benchmark.monitor.resources import release_free_memory

    release_free_memory()
    load = streaming.stream_once(path, 4 * MiB, method="load")
    assert not load.peak_is_exact
    assert load.peak_increase_bytes > 32 * MiB  # the whole 64-MiB file was resident at once


def test_without_a_cap_section_8_runs_every_pass_but_the_one_meant_to_fail(tmp_path):
    # on Linux RLIMIT_AS still applies (capped=False only allows running without one): a budget of 2 MiB head-room
    # ran out of memory in some runs, depending on the heap the child inherited; 8 MiB leaves the stream room
    path = streaming.write_synthetic_dataset(tmp_path / "d", n_samples=32 * MiB // 256, n_features=64)
    passes = streaming.stream_passes(path, 8 * MiB, capped=False)
    assert ("load", 8 * MiB) not in passes and ("stream", 8 * MiB) in passes
    assert all(r.ok for r in passes.values()), {k: r.summary() for k, r in passes.items() if not r.ok}
    assert passes["stream", 8 * MiB].value.accuracy == passes["load", 2**31].value.accuracy
