"""Tests of course_lib.distributed: the local launcher and notebook 03's worker functions.

Every launch spawns fresh processes (~2 s a rank for `import torch` on 2 cores), so the tests share
launches where they can: the whole file runs in about a minute on a 2-core machine.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch

from course_lib import distributed as d
from course_lib.hardware import leftover_children


# ----------------------------------------------------------------------------------------------
# input validation (no processes are started)

def test_lambda_is_rejected_with_a_helpful_message():
    with pytest.raises(TypeError, match=r"put the function in a \.py module.*course_lib\.distributed"):
        d.launch(lambda: 1, 2)


def test_nested_function_is_rejected():
    def inner():
        return 1

    with pytest.raises(TypeError, match="nested functions"):
        d.launch(inner, 2)


def test_main_module_function_is_rejected():
    def f():
        return 1

    f.__module__ = "__main__"
    f.__qualname__ = "f"
    with pytest.raises(TypeError, match="notebook cell"):
        d.launch(f, 1)


def test_not_callable_is_rejected():
    with pytest.raises(TypeError, match="fn must be a callable"):
        d.launch("demo_rank_sum", 1)


@pytest.mark.parametrize("bad", [0, -1, 10_000])
def test_bad_world_size(bad):
    with pytest.raises(ValueError, match="world_size"):
        d.launch(d.demo_rank_sum, bad)


def test_world_size_must_be_int():
    with pytest.raises(TypeError, match="world_size"):
        d.launch(d.demo_rank_sum, 2.0)


def test_unknown_backend():
    with pytest.raises(ValueError, match=r"backend must be one of \('gloo', 'nccl'\)"):
        d.launch(d.demo_rank_sum, 2, backend="mpi")


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() >= 2, reason="has 2 GPUs")
def test_nccl_without_gpus():
    with pytest.raises(ValueError, match="nccl"):
        d.launch(d.demo_rank_sum, 2, backend="nccl")


@pytest.mark.parametrize("kw", [{"timeout": 0}, {"timeout": -1.0}, {"threads_per_rank": 0},
                                {"startup_timeout": 0}])
def test_bad_launch_options(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        d.launch(d.demo_rank_sum, 1, **kw)


def test_unpicklable_argument():
    with pytest.raises(TypeError, match="picklable"):
        d.launch(d.demo_rank_sum, 1, lambda: 0)


def test_rank_info_outside_a_job():
    with pytest.raises(RuntimeError, match="launch"):
        d.rank_info()


def test_defaults_do_not_oversubscribe():
    assert d.max_world_size() >= 4
    assert d.default_threads_per_rank(1) >= d.default_threads_per_rank(2) >= 1
    assert d.default_threads_per_rank(d.max_world_size()) == 1
    assert d.ALLREDUCE_SIZES[0] == 1024 and d.ALLREDUCE_SIZES[-1] == 64 * 2**20


# ----------------------------------------------------------------------------------------------
# launching

@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_launch_returns_results_in_rank_order(world_size):
    out = d.launch(d.demo_rank_sum, world_size)
    total = float(sum(range(1, world_size + 1)))
    assert out == [(r, world_size, total) for r in range(world_size)]
    assert leftover_children() == []
    stats = d.last_launch_stats()
    assert stats["outcome"] == "ok" and stats["world_size"] == world_size
    assert d.port_is_free(stats["port"])


def test_rank_info_inside_a_job():
    out = d.launch(d.demo_rank_info, 2, threads_per_rank=1)
    assert [o["rank"] for o in out] == [0, 1]
    assert all(o["world_size"] == 2 and o["backend"] == "gloo" and o["device"] == "cpu" for o in out)
    assert all(o["num_threads"] == 1 for o in out)
    assert out[0]["master_port"] == out[1]["master_port"] == d.last_launch_stats()["port"]


def test_ring_all_reduce_matches_library_on_2_and_3_ranks():
    sizes = [1, 2, 7, 1000, 1001, 2**16 + 3]  # 1 and 2 are smaller than 3 ranks: empty chunks
    for world_size in (2, 3):
        per_rank = d.launch(d.check_ring_against_library, world_size, sizes, seed=3)
        assert len(per_rank) == world_size
        for rows in per_rank:
            assert [r["size"] for r in rows] == sizes
            for r in rows:
                assert r["allclose"], f"ring all-reduce differs from dist.all_reduce: {r}"
                assert r["max_abs_diff"] < 1e-4


def test_ring_all_reduce_on_one_rank_is_a_copy():
    (rows,) = d.launch(d.check_ring_against_library, 1, [1, 5])
    assert all(r["max_abs_diff"] == 0.0 and r["allclose"] for r in rows)


def test_rank_that_dies_without_reporting():
    # os._exit is importable (posix._exit), so spawn can send it: the rank exits with code 3 at once
    with pytest.raises(d.RankError, match="exited with code 3"):
        d.launch(os._exit, 1, 3)
    assert leftover_children() == []


def test_startup_timeout():
    with pytest.raises(d.LaunchTimeout) as info:
        d.launch(d.demo_rank_sum, 2, startup_timeout=0.3)
    assert info.value.phase == "startup" and info.value.unfinished == [0, 1]
    assert "startup_timeout" in str(info.value)
    assert leftover_children() == []


def test_ctrl_c_stops_every_rank():
    # from another thread, like a Jupyter interrupt arriving while launch waits
    timer = threading.Timer(3.0, os.kill, args=(os.getpid(), signal.SIGINT))
    t0 = time.perf_counter()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            d.launch(d.demo_sleep_on_rank, 2, rank_to_sleep=1, seconds=600, timeout=60)
    finally:
        timer.cancel()
    assert time.perf_counter() - t0 < 30, "Ctrl-C must stop the job promptly, not at its timeout"
    assert leftover_children() == []
    assert d.last_launch_stats()["outcome"] == "interrupted"


def test_failing_rank_raises_rank_error_and_cleans_up():
    with pytest.raises(d.RankError) as info:
        d.launch(d.demo_raise_on_rank, 2, rank_to_fail=1, error="ValueError", timeout=30)
    err = info.value
    assert isinstance(err, RuntimeError)
    assert err.rank == 1 and err.error_type == "ValueError"
    assert "rank 1" in str(err) and "ValueError" in str(err) and "failed on purpose" in str(err)
    assert "Traceback" in err.traceback_text
    assert leftover_children() == []
    port = d.last_launch_stats()["port"]
    assert d.port_is_free(port)
    # an immediate second launch works
    assert d.launch(d.demo_rank_sum, 2) == [(0, 2, 3.0), (1, 2, 3.0)]


def test_hung_rank_times_out_and_cleans_up():
    t0 = time.perf_counter()
    with pytest.raises(d.LaunchTimeout) as info:
        d.launch(d.demo_sleep_on_rank, 2, rank_to_sleep=1, seconds=600, timeout=3)
    elapsed = time.perf_counter() - t0
    err = info.value
    assert isinstance(err, TimeoutError)
    assert err.unfinished == [1] and err.phase == "run"
    assert "[1]" in str(err) and "timeout=3" in str(err)
    assert elapsed < 3 + 30, f"the timeout took {elapsed:.1f} s to fire"
    assert leftover_children() == []
    assert d.port_is_free(d.last_launch_stats()["port"])


def test_allreduce_benchmark_rows():
    sizes = [1024, 4096, 2**20]
    out = d.launch(d.allreduce_benchmark, 2, sizes, repeats=3, warmup=1)
    assert out[0] == out[1], "every rank returns the same (slowest-rank) times"
    rows = out[0]
    assert [r["bytes"] for r in rows] == sizes
    for r in rows:
        assert len(r["times"]) == 3 and r["median_s"] > 0 and r["world_size"] == 2
        assert r["busbw_Bps"] == pytest.approx(r["algbw_Bps"])  # 2 (N-1) / N = 1 for N = 2
